"""Echo every given input IN_<TYPE> as OUT_<TYPE>; report the request's parameters.

BF16 has no numpy type in the Python backend, so tensors pass through DLPack.
The response parameter "request_parameters" carries the request parameters as JSON.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [item["name"] for item in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    continue
                out_name = "OUT_" + name[len("IN_") :]
                if name == "IN_BF16":
                    outputs.append(pb_utils.Tensor.from_dlpack(out_name, tensor.to_dlpack()))
                else:
                    outputs.append(pb_utils.Tensor(out_name, tensor.as_numpy()))
            parameters = {"request_parameters": request.parameters()}
            responses.append(
                pb_utils.InferenceResponse(output_tensors=outputs, parameters=parameters)
            )
        return responses
