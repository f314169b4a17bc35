"""OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            left = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            right = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", left + right),
                pb_utils.Tensor("OUTPUT1", left - right),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
