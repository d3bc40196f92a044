"""Where a story's chain leaks: for each link, what its reconciliation matched and left unmatched
per side and currency, its open exceptions and its last run, and for each continuation what
passed the previous link on the shared stream but is still unmatched in this one.

Everything is read from stored figures (the stream tallies the exception refresh keeps, the
exceptions' totals, the runs), a few items per link whatever the number of records.
"""
from __future__ import annotations

from dataclasses import dataclass

from chalicelib.domain.reconciliation_exceptions import ReconciliationException
from chalicelib.domain.reconciliations import Reconciliation
from chalicelib.domain.runs import Run
from chalicelib.domain.stories import Story, StoryLink
from chalicelib.domain.tallies import LinkFigures, link_figures
from chalicelib.services.ports import Ports
from chalicelib.services.stories import chained_reconciliations


@dataclass(frozen=True)
class LinkSummary:
    link: StoryLink
    reconciliation: Reconciliation | None  # None while a delete refused a moment ago hides it
    figures: LinkFigures
    exceptions: tuple[ReconciliationException, ...]  # active ones, by stream
    last_run: Run | None

    @property
    def refresh_pending(self) -> bool:
        return self.reconciliation is not None and self.reconciliation.exceptions_refresh_pending


@dataclass(frozen=True)
class StorySummary:
    story: Story
    links: tuple[LinkSummary, ...]


def summarize_story(ports: Ports, environment: str, story_id: int) -> StorySummary:
    story = ports.stories.get(environment, story_id)
    reconciliations = chained_reconciliations(ports, environment, story.reconciliation_ids)
    runs = ports.runs.get_many(environment, [run_id for r in reconciliations.values()
                                             if (run_id := _latest_run_id(r)) is not None])
    links = []
    previous: StoryLink | None = None
    for link in story.links:
        reconciliation = reconciliations.get(link.reconciliation_id)
        links.append(_link_summary(ports, link, reconciliation, previous, runs))
        previous = link
    return StorySummary(story, tuple(links))


def _link_summary(ports: Ports, link: StoryLink, reconciliation: Reconciliation | None, previous: StoryLink | None,
                  runs: dict[int, Run]) -> LinkSummary:
    if reconciliation is None:
        return LinkSummary(link, None, link_figures((), (), ()), (), None)
    environment = reconciliation.environment
    figures = link_figures(reconciliation.side_a_stream_keys, reconciliation.side_b_stream_keys,
                           ports.tallies.of_reconciliation(environment, reconciliation.id),
                           previous_reconciliation_id=previous.reconciliation_id if previous else None,
                           shared_stream_key=link.shared_stream_key)
    exceptions = tuple(e for key in reconciliation.stream_keys
                       if (e := ports.exceptions.find_active(environment, reconciliation.id, key)) is not None)
    run_id = _latest_run_id(reconciliation)
    return LinkSummary(link, reconciliation, figures, exceptions, runs.get(run_id) if run_id is not None else None)


def _latest_run_id(reconciliation: Reconciliation) -> int | None:
    """The run under way, else the last one."""
    return reconciliation.current_run_id or reconciliation.last_run_id
