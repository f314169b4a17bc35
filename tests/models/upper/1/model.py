import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array(
                [item.decode("utf-8").upper().encode() for item in text.reshape(-1)],
                dtype=np.object_,
            )
            output = pb_utils.Tensor("UPPER", upper.reshape(text.shape))
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
