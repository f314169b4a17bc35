import json
import pathlib
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            # A test waits for this file to know that the request is running.
            started = json.loads(request.parameters() or "{}").get("started")
            if started:
                pathlib.Path(started).touch()
            time.sleep(float(seconds[0]))
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SLEPT", seconds)])
            )
        return responses
