import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = json.dumps(json.loads(request.parameters() or "{}"), sort_keys=True)
            out = pb_utils.Tensor("HEADERS", np.array([text.encode()], dtype=np.object_))
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return
