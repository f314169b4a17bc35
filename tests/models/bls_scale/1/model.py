import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inner = pb_utils.InferenceRequest(
                model_name="scale",
                requested_output_names=["OUT"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "IMAGE"),
                    pb_utils.get_input_tensor_by_name(request, "SCALE"),
                ],
            )
            answer = inner.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            scaled = pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()
            out = pb_utils.Tensor("PLUS_ONE", scaled + 1)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
