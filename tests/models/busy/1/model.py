import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            millis = pb_utils.get_input_tensor_by_name(request, "MILLIS").as_numpy()
            time.sleep(float(millis.sum()) / 1000.0)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("MILLIS_OUT", millis)])
            )
        return responses
