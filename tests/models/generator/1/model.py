import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            limit = pb_utils.get_input_tensor_by_name(request, "max_tokens")
            count = int(limit.as_numpy().reshape(-1)[0]) if limit is not None else 4
            words = text.reshape(-1)[0].decode("utf-8").split() or ["..."]
            sender = request.get_response_sender()
            for index in range(count):
                if sender.is_cancelled():
                    break
                token = (words[index % len(words)] + " ").encode("utf-8")
                outputs = [
                    pb_utils.Tensor("text_output", np.array([token], dtype=np.object_)),
                    pb_utils.Tensor("index", np.array([index], dtype=np.int32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
