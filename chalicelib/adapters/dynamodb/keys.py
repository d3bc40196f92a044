"""Every key of the single table is built here, and nowhere else.

Layout (one table, generic attributes `pk`, `sk`, `gsi1pk`, `gsi1sk`, `gsi2pk`, `gsi2sk`):

| item                     | pk                          | sk               | gsi1pk / gsi1sk                         |
|--------------------------|-----------------------------|------------------|-----------------------------------------|
| API key                  | KEY#<sha256>                | KEY              | KEYS / <id>                             |
| id counter               | E#<env>#COUNTER             | <entity>         |                                         |
| data stream              | E#<env>#DS#<key>            | DS               | E#<env>#DS / <id>  (newest first)       |
| property key guard       | E#<env>#DS#<stream key>     | PDKEY#<prop key> |                                         |
| property definition      | E#<env>#PD#<id>             | PD               | E#<env>#PD / <stream key>#<id>          |

The environment is the first part of every key of environment data, so isolation is
structural: no query can reach another environment's partition. API keys are the one
exception: they are looked up by their hash before the environment is known, and each
names its environment. Ids are zero-padded so that string order is numeric order.
"""
from __future__ import annotations

ID_WIDTH = 12
GLOBAL_COUNTER_PK = "GLOBAL#COUNTER"


def _id(value: int) -> str:
    return str(value).zfill(ID_WIDTH)


def env_prefix(environment: str) -> str:
    return f"E#{environment}"


# Counters -------------------------------------------------------------------------------

def counter(environment: str, entity: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#COUNTER", "sk": entity}


def global_counter(entity: str) -> dict[str, str]:
    return {"pk": GLOBAL_COUNTER_PK, "sk": entity}


# API keys -------------------------------------------------------------------------------

API_KEYS_INDEX_PK = "KEYS"


def api_key(key_hash: str) -> dict[str, str]:
    return {"pk": f"KEY#{key_hash}", "sk": "KEY"}


def api_key_index(key_id: int) -> dict[str, str]:
    return {"gsi1pk": API_KEYS_INDEX_PK, "gsi1sk": _id(key_id)}


# Data streams ---------------------------------------------------------------------------

def data_stream(environment: str, key: str) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#DS#{key}", "sk": "DS"}


def data_streams_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#DS"


def data_stream_index(environment: str, stream_id: int) -> dict[str, str]:
    return {"gsi1pk": data_streams_index_pk(environment), "gsi1sk": _id(stream_id)}


# Property definitions -------------------------------------------------------------------

PROPERTY_GUARD_PREFIX = "PDKEY#"


def property_key_guard(environment: str, stream_key: str, property_key: str) -> dict[str, str]:
    return {"pk": data_stream(environment, stream_key)["pk"], "sk": f"{PROPERTY_GUARD_PREFIX}{property_key}"}


def property_definition(environment: str, definition_id: int) -> dict[str, str]:
    return {"pk": f"{env_prefix(environment)}#PD#{_id(definition_id)}", "sk": "PD"}


def property_definitions_index_pk(environment: str) -> str:
    return f"{env_prefix(environment)}#PD"


def property_definitions_of_stream_prefix(stream_key: str) -> str:
    return f"{stream_key}#"


def property_definition_index(environment: str, stream_key: str, definition_id: int) -> dict[str, str]:
    return {
        "gsi1pk": property_definitions_index_pk(environment),
        "gsi1sk": f"{property_definitions_of_stream_prefix(stream_key)}{_id(definition_id)}",
    }
