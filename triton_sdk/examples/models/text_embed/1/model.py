"""A small, deterministic text embedder.

Each text is split into character trigrams; every trigram is hashed into one of
768 buckets and the bucket counts are L2-normalised. Similar texts share
trigrams, so their embeddings have a high cosine similarity. No weights, no
downloads: it runs anywhere the Python backend runs.
"""

import hashlib

import numpy as np
import triton_python_backend_utils as pb_utils

DIMS = 768


def embed(text: str) -> np.ndarray:
    padded = f"  {text.lower()} "
    vector = np.zeros(DIMS, dtype=np.float32)
    for start in range(len(padded) - 2):
        digest = hashlib.blake2b(padded[start : start + 3].encode("utf-8"), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % DIMS
        sign = 1.0 if digest[4] & 1 else -1.0
        vector[bucket] += sign
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm else vector


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            batch = np.stack([embed(item.decode("utf-8")) for item in texts[:, 0]])
            output = pb_utils.Tensor("OUTPUT", batch)
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
