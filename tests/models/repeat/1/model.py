import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            delay_s = float(delay.as_numpy()[0]) / 1000.0 if delay is not None else 0.0
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.respond, args=(sender, values, delay_s))
            thread.start()
            self.threads.append(thread)
        return

    def respond(self, sender, values, delay_s):
        for index, value in enumerate(values):
            if sender.is_cancelled():
                break
            if value <= -100:
                error = pb_utils.TritonError(f"far too negative: {value}")
                sender.send(pb_utils.InferenceResponse(error=error))
                continue
            if value < 0:
                error = pb_utils.TritonError(f"no negative numbers: {value}")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                return
            outputs = [
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            if delay_s:
                time.sleep(delay_s)
        sender.send(flags=FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
