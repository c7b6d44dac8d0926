"""An LLM endpoint's shared scope and budget from its configuration and the environment (no Ray)."""

from __future__ import annotations

import pytest

from actors import LlmConfig, LlmConfigError
from cluster.semaphore import Budget, BudgetConfigError, budget_of, endpoint_scope


def test_the_budget_comes_from_the_environment_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLOIST_LLM_REQUESTS_PER_MINUTE", "500")
    monkeypatch.setenv("SOLOIST_LLM_TOKENS_PER_MINUTE", "30000")
    config = LlmConfig.from_env(base_url="http://Host:8000/v1/", model="m")
    assert config.budget == Budget.per_minute(requests=500, tokens=30_000)
    given = LlmConfig.from_env(base_url="http://h/v1", model="m", budget=Budget(tokens=10, window_s=1.0))
    assert given.budget == Budget(tokens=10, window_s=1.0)


def test_calls_share_the_scope_of_base_url_and_model_unless_named_or_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOLOIST_LLM_REQUESTS_PER_MINUTE", raising=False)
    monkeypatch.delenv("SOLOIST_LLM_TOKENS_PER_MINUTE", raising=False)
    config = LlmConfig.from_env(base_url="http://Host:8000/v1/", model="m")
    endpoint = config.endpoint()
    assert endpoint is not None and endpoint.scope == "model:http://host:8000/v1#m" == endpoint_scope("http://host:8000/v1", "m")
    assert endpoint.budget is None and endpoint.permits == 4
    named = LlmConfig.from_env(base_url="http://h/v1", model="m", scope="account-7").endpoint()
    assert named is not None and named.scope == "account-7"
    assert LlmConfig.from_env(base_url="http://h/v1", model="m", shared=False).endpoint() is None


def test_a_bad_budget_in_the_environment_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLOIST_LLM_TOKENS_PER_MINUTE", "lots")
    with pytest.raises(LlmConfigError, match="SOLOIST_LLM_TOKENS_PER_MINUTE must be a positive integer, got 'lots'"):
        LlmConfig.from_env(base_url="http://h/v1", model="m")
    monkeypatch.setenv("SOLOIST_LLM_TOKENS_PER_MINUTE", "-5")
    with pytest.raises(LlmConfigError, match="SOLOIST_LLM_TOKENS_PER_MINUTE must be a positive integer, got '-5'"):
        LlmConfig.from_env(base_url="http://h/v1", model="m")


def test_a_bad_budget_is_refused_naming_each_field() -> None:
    with pytest.raises(BudgetConfigError, match="invalid Budget: tokens must be a positive int or None, got -5; "
                                                "window_s must be a finite number of seconds > 0, got 0"):
        budget_of(tokens=-5, window_s=0)
