"""Echo every given input IN_<TYPE> as OUT_<TYPE>; PARAMETERS = the request parameters as JSON.

BF16 has no numpy type in the Python backend, so that tensor passes through DLPack.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [item["name"] for item in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            batch = 1
            for name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    continue
                batch = tensor.shape()[0]
                out_name = "OUT_" + name[len("IN_") :]
                if name == "IN_BF16":
                    outputs.append(pb_utils.Tensor.from_dlpack(out_name, tensor.to_dlpack()))
                else:
                    outputs.append(pb_utils.Tensor(out_name, tensor.as_numpy()))
            parameters = np.array([[request.parameters().encode()]] * batch, dtype=np.object_)
            outputs.append(pb_utils.Tensor("PARAMETERS", parameters))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
