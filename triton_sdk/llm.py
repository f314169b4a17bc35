"""LLM chat and completions: the schema adapters and chat templates behind
:meth:`~triton_sdk.Model.chat` and :meth:`~triton_sdk.Model.complete`.

The adapter is chosen from the model's inputs and outputs; ``adapter=custom(...)`` describes
a text model of your own::

    model.chat(messages, adapter=triton_sdk.llm.custom(prompt="PROMPT", text="ANSWER"))
"""

from ._chat_template import ChatTemplate, ChatTemplateError, Message, load_chat_template
from ._llm import (
    VLLM,
    Adapter,
    CustomSchema,
    LLMAdapter,
    SamplingValue,
    TensorRTLLM,
    TensorRTLLMAPI,
    adapter_for,
    custom,
)

__all__ = [
    "VLLM",
    "Adapter",
    "ChatTemplate",
    "ChatTemplateError",
    "CustomSchema",
    "LLMAdapter",
    "Message",
    "SamplingValue",
    "TensorRTLLM",
    "TensorRTLLMAPI",
    "adapter_for",
    "custom",
    "load_chat_template",
]
