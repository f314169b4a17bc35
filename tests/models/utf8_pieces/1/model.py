import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            size = pb_utils.get_input_tensor_by_name(request, "piece_bytes")
            step = int(size.as_numpy().reshape(-1)[0]) if size is not None else 1
            data = bytes(text.reshape(-1)[0])
            sender = request.get_response_sender()
            for start in range(0, len(data), step):
                piece = np.array([data[start : start + step]], dtype=np.object_)
                output = pb_utils.Tensor("text_output", piece)
                sender.send(pb_utils.InferenceResponse(output_tensors=[output]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
