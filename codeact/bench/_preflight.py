"""Pre-flight: before the first episode, each model endpoint answers one tiny request.

A sweep against an endpoint that is down, refuses the key or does not serve
the model would otherwise run every episode into the same error and report
0 % success. One request per model, with the run's own settings (temperature,
seed) so that a server that rejects one of them fails here too, and one retry
at most. The sandbox's half of the pre-flight is the runner's (it owns the
pool of sandboxes): see ``Runner._check_sandbox``.
"""

from __future__ import annotations

from typing import Any

from ..errors import BenchError, ModelError
from ._oracle import ORACLE

#: What the pre-flight asks: a short reply, whatever the model.
PREFLIGHT_PROMPT = "Reply with the single word OK."

#: Seconds the pre-flight request may take (at most the run's --model-timeout).
PREFLIGHT_TIMEOUT = 30.0


def check_models(config: Any) -> None:
    """One tiny request per model of ``config`` (the oracle needs none).

    Raises:
        ConfigError: a model that cannot even be built (no API key for the default endpoint).
        BenchError: a model whose endpoint fails; the message names the model, the endpoint and what to fix.
    """
    from ..messages import Message
    from ..models import OpenAIModel

    for name in config.models:
        if name == ORACLE:
            continue
        model = OpenAIModel(name, base_url=config.base_url, api_key=config.api_key,
                            temperature=config.temperature, seed=config.seed,
                            timeout=min(PREFLIGHT_TIMEOUT, float(config.model_timeout)), max_retries=1,
                            backoff=0.5, max_backoff=2.0)
        try:
            model.complete([Message("user", PREFLIGHT_PROMPT)])
        except ModelError as exc:
            raise BenchError(f"pre-flight: model {name!r} does not answer: {exc}. No episode was run") from None
        finally:
            model.close()

