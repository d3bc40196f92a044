"""Reading what a role of the infrastructure template may do (its inline and managed policies)."""
from __future__ import annotations

import re


def resource_matches(pattern: str, arn: str) -> bool:
    """Whether a policy's Resource `pattern` covers `arn`, as IAM matches them: `*` stands for any run of
    characters (`:` and `/` included), `?` for any one, everything else for itself."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn) is not None


def statements(resources: dict, role: str) -> list[dict]:
    """Every statement a role is given, inline or by its managed policies."""
    props = resources[role]["Properties"]
    documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
    documents += [resources[ref["Ref"]]["Properties"]["PolicyDocument"] for ref in props.get("ManagedPolicyArns", [])]
    return [statement for document in documents for statement in document["Statement"]]


def allows(statements: list[dict], action: str, resource: object) -> bool:
    def listed(value, item):
        return item in value if isinstance(value, list) else value == item
    return any(s["Effect"] == "Allow" and listed(s["Action"], action) and listed(s["Resource"], resource)
               for s in statements)
