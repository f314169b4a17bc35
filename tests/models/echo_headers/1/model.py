import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            batch = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().shape[0]
            text = json.dumps(json.loads(request.parameters() or "{}"), sort_keys=True)
            out = np.array([[text.encode()]] * batch, dtype=np.object_)
            tensor = pb_utils.Tensor("HEADERS", out)
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses
