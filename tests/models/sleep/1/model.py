import json
import pathlib
import time

import triton_python_backend_utils as pb_utils


def marker(parameters, name):
    """The file a test named in parameter `name`, or in header `x-name` (forwarded)."""
    path = parameters.get(name) or parameters.get(f"x-{name}")
    return pathlib.Path(path) if path else None


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            parameters = json.loads(request.parameters() or "{}")
            # Tests wait for these files to know that the request is running, or has run.
            started, finished = marker(parameters, "started"), marker(parameters, "finished")
            if started:
                started.touch()
            time.sleep(abs(float(seconds[0])))
            if seconds[0] < 0:
                error = pb_utils.TritonError(f"slept {-seconds[0]} s, then failed as asked")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            if finished:
                finished.touch()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SLEPT", seconds)])
            )
        return responses
