import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            scale = pb_utils.get_input_tensor_by_name(request, "SCALE").as_numpy()
            bias_tensor = pb_utils.get_input_tensor_by_name(request, "BIAS")
            bias = bias_tensor.as_numpy() if bias_tensor is not None else np.zeros_like(scale)
            out = image.astype(np.float32) * scale[:, :, None] + bias[:, :, None]
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)])
            )
        return responses
