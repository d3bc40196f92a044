"""The names `chalice deploy` gives the app's functions, read from Chalice's own application graph
(what its deployer creates), for a stage configuration such as infra/deploy.py stage_config writes."""
from __future__ import annotations


def chalice_function_names(stage: str, config: dict | None = None) -> dict[str, str]:
    """{lambda function's name in app.py (the API's: api_handler): the function's name on AWS}."""
    from chalice.config import Config
    from chalice.deploy.appgraph import ApplicationGraphBuilder

    from app import app

    config = config or {"app_name": "recon", "stages": {stage: {"manage_iam_role": False,
                                                                 "iam_role_arn": "arn:aws:iam::123456789012:role/r"}}}
    chalice_config = Config.create(chalice_stage=stage, app_name=config["app_name"], chalice_app=app,
                                   project_dir=".", config_from_disk=config)
    graph = ApplicationGraphBuilder().build(chalice_config, stage)
    return {node.resource_name: node.function_name for node in _walk(graph)
            if type(node).__name__ == "LambdaFunction"}


def _walk(node, seen: set[int] | None = None):
    seen = seen if seen is not None else set()
    if id(node) in seen:
        return
    seen.add(id(node))
    yield node
    for child in getattr(node, "dependencies", lambda: [])():
        yield from _walk(child, seen)
