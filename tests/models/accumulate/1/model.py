import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().sum())
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy().sum())
            end = int(pb_utils.get_input_tensor_by_name(request, "END").as_numpy().sum())
            corrid_tensor = pb_utils.get_input_tensor_by_name(request, "CORRID")
            corrid = int(corrid_tensor.as_numpy().sum()) if corrid_tensor is not None else 0
            total = (0 if start else self.sums.get(corrid, 0)) + value
            if end:
                self.sums.pop(corrid, None)
            else:
                self.sums[corrid] = total
            out = pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
