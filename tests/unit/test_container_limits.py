"""The limits the container gives the services from the settings and the stack it runs on."""
from datetime import timedelta

from chalicelib.container import INDEX_SETTLE, Container
from chalicelib.settings import Settings


def test_a_close_waits_for_the_indexes_on_aws_and_not_on_the_local_stack_whose_indexes_take_the_item():
    assert INDEX_SETTLE > timedelta(0)
    assert Container(Settings(local_mode=False)).limits.index_settle == INDEX_SETTLE
    assert Container(Settings(local_mode=True)).limits.index_settle == timedelta(0)


def test_the_models_agents_may_name_are_the_settings_list_or_any_when_unset():
    assert Container(Settings()).limits.agent.models is None
    listed = Container(Settings(agent_models=" amazon.nova-pro-v1:0, us.anthropic.claude-sonnet-4-20250514-v1:0,"))
    assert listed.limits.agent.models == {"amazon.nova-pro-v1:0", "us.anthropic.claude-sonnet-4-20250514-v1:0"}
    assert Container(Settings(agent_models="")).limits.agent.models == frozenset()  # only the default
