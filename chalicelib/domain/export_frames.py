"""An export's page of records as a polars frame of `record_row`'s columns (exports.COLUMNS), built
from the analytics mirror's rows of the ids the page wants and from records read whole; written by
`exports.frame_csv_bytes`. polars is imported here only: the services hand frames on."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.domain.exports import COLUMNS, ExportKind
from chalicelib.domain.money import decimal_string
from chalicelib.domain.records import RecordStatus

# The mirror's columns a record row takes (adapters/mirror.py COLUMNS)
MIRROR_COLUMNS = ("id", "data_stream_key", "date", "direction", "amount", "currency", "decimal_places",
                  "external_id", "description", "file_import_id", "created_at", "metadata")


def schema() -> dict[str, Any]:
    """`record_row`'s columns as polars types."""
    import polars as pl

    return {column.name: pl.Int64 if column.type == "int" else pl.Utf8 for column in COLUMNS[ExportKind.RECORDS]}


def unreconciled_from_mirror(imports: list[Any], low: int, high: int, wanted: list[int]) -> Any:
    """The rows of the ids `wanted` (all from `low` to `high`) that these imports' lazy mirror frames
    hold, as unreconciled records; rows mirrored before `created_at` was a column are left out (the
    caller reads those from the table)."""
    import polars as pl

    found = [frame.filter(pl.col("id").is_between(low, high) & pl.col("id").is_in(wanted)) for frame in imports]
    if not found:
        return pl.DataFrame(schema=schema())
    frame = pl.concat(found, how="diagonal_relaxed").collect()
    if "created_at" not in frame.columns:
        return pl.DataFrame(schema=schema())
    for name in MIRROR_COLUMNS:
        if name not in frame.columns:  # parts written before `metadata` was a column
            frame = frame.with_columns(pl.lit(None, dtype=pl.Utf8).alias(name))
    frame = frame.filter(pl.col("created_at").is_not_null())
    amounts = [decimal_string(amount, places) for amount, places in zip(frame["amount"].to_list(),
                                                                         frame["decimal_places"].to_list(),
                                                                         strict=True)]
    return frame.select(
        "id", "data_stream_key", "date", "direction", pl.col("amount").alias("amount_minor"),
        pl.Series("amount", amounts, dtype=pl.Utf8), "currency", "decimal_places",
        pl.lit(RecordStatus.UNRECONCILED.value).alias("status"), "external_id", "description", "file_import_id",
        "created_at", "metadata",
    ).cast(schema())


def ids_of(frame: Any) -> set[int]:
    return set(frame["id"].to_list())


def page_of(frames: list[Any], rows: list[tuple[Any, ...]], admits: Callable[[tuple[Any, ...]], bool] | None) -> Any:
    """These frames and `record_row` rows as one page, newest first, only the rows `admits` keeps
    (None: every row)."""
    import polars as pl

    page = pl.concat([*frames, pl.DataFrame(rows, schema=schema(), orient="row")])
    if admits is not None:
        page = page.filter(pl.Series([admits(row) for row in page.iter_rows()], dtype=pl.Boolean))
    return page.sort("id", descending=True)
