from chalicelib.services.paging import every


def _listing(pages: list[list[int]], asked: list[str | None]):
    """A cursor-paged listing of `pages`, noting every cursor it is asked for."""
    def page(cursor: str | None) -> tuple[list[int], str | None]:
        asked.append(cursor)
        n = 0 if cursor is None else int(cursor)
        return pages[n], (str(n + 1) if n + 1 < len(pages) else None)
    return page


def test_every_reads_each_page_once_in_order():
    asked: list[str | None] = []
    assert list(every(_listing([[1, 2], [], [3]], asked))) == [1, 2, 3]
    assert asked == [None, "1", "2"]


def test_every_reads_no_page_past_where_the_caller_stops():
    asked: list[str | None] = []
    items = every(_listing([[1, 2], [3, 4], [5]], asked))
    assert [next(items), next(items)] == [1, 2]
    assert asked == [None]  # the second page is read only when the caller asks past the first
    assert next(items) == 3 and asked == [None, "1"]


def test_every_of_an_empty_listing():
    asked: list[str | None] = []
    assert list(every(_listing([[]], asked))) == []
    assert asked == [None]
