"""A Monitor's status stays under a fixed size, whatever the model returns.

etcd refuses objects over 1.5 MiB, and a status that grows past that wedges the loop
after its report is out. Each fact is stored once (the last observation's progress lives
in `status.progress`), and when a status is still too large the free text the model
wrote is cut, with a visible marker, before any history goes. The recorded authority is
never cut: the models bound it so it always fits.
"""

from __future__ import annotations

from goalkeeper.core.models import MonitorStatus, Observation

STATUS_BUDGET = 256 * 1024
CUT_MARKER = " [… cut by goalkeeper: {} more characters]"
# Free text is cut to these lengths in turn until the status fits.
TEXT_STEPS = (1000, 200)


def status_size(status: MonitorStatus) -> int:
    return len(status.model_dump_json(exclude_none=True))


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(len(text) - limit)
    keep = max(limit - len(marker), 1)
    return text[:keep] + CUT_MARKER.format(len(text) - keep)


def fit_status(status: MonitorStatus, budget: int = STATUS_BUDGET) -> MonitorStatus:
    """`status` with each fact stored once and, if needed, its free text cut to fit."""
    observation = status.lastObservation
    if observation is not None:
        # Progress is kept in status.progress and the authority in status.contract and
        # status.authorizedActions; the observation's own copies would be stored twice.
        stored = _obs(observation.without_authority(), progress=None)
        status = _with(status, lastObservation=stored)
    for limit in TEXT_STEPS:
        if status_size(status) <= budget:
            return status
        status = _cut_texts(status, limit)
    while status_size(status) > budget and _history(status):
        status = _drop_oldest(status)
    return status


def _with(status: MonitorStatus, **update: object) -> MonitorStatus:
    return status.model_copy(update=update)


def _obs(last: Observation, **update: object) -> Observation:
    return last.model_copy(update=update)


def _cut_texts(status: MonitorStatus, limit: int) -> MonitorStatus:
    update: dict[str, object] = {}
    if status.lastObservation is not None:
        obs = status.lastObservation
        update["lastObservation"] = _obs(
            obs,
            observation=cut(obs.observation, limit),
            report=cut(obs.report, limit),
            reason=cut(obs.reason, limit),
        )
    if status.lastRejection is not None:
        update["lastRejection"] = cut(status.lastRejection, limit)
    if status.lastAction is not None:
        update["lastAction"] = status.lastAction.model_copy(
            update={"evidence": cut(status.lastAction.evidence, limit)}
        )
    ledger = status.spend
    entries = [e.model_copy(update={"action": cut(e.action, limit)}) for e in ledger.entries]
    update["spend"] = ledger.model_copy(update={"entries": entries})
    return _with(status, **update)


def _history(status: MonitorStatus) -> bool:
    return bool(status.spend.entries or len(status.attempts) > 1 or len(status.repairsDone) > 1)


def _drop_oldest(status: MonitorStatus) -> MonitorStatus:
    """Half of the oldest history; the ledger's total still covers every entry."""
    ledger = status.spend
    return _with(
        status,
        spend=ledger.model_copy(update={"entries": ledger.entries[len(ledger.entries) // 2 + 1 :]}),
        attempts=status.attempts[len(status.attempts) // 2 :],
        repairsDone=status.repairsDone[len(status.repairsDone) // 2 :],
    )
