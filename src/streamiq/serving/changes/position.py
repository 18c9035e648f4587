"""A subscription's position: per changelog partition, the next offset to deliver.

Written ``partition-offset`` joined by ``.`` (``3-1207``; ``0-88.1-97.2-120``): the
``id:`` of each event and what ``from=`` / ``Last-Event-ID`` resume after.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from streamiq.errors import BadRequest

__all__ = ["parse", "render"]

#: longest position text read (a view has at most 256 partitions: ~6,000 characters)
_MAX = 8192


def render(position: Mapping[int, int]) -> str:
    return ".".join(f"{p}-{o}" for p, o in sorted(position.items()))


def parse(text: str, partitions: Iterable[int], field: str = "from") -> dict[int, int]:
    """The position ``text`` names, for a subscription over ``partitions``; a 400 naming
    ``field`` when it is not a position or not of these partitions."""
    want = set(partitions)
    out: dict[int, int] = {}
    if len(text) > _MAX:
        raise BadRequest(f"{field}: a position of {len(text)} characters, more than {_MAX}",
                         field=field)
    for part in text.split("."):
        p, sep, o = part.partition("-")
        if not (sep and p.isdigit() and o.isdigit() and p.isascii() and o.isascii()):
            raise BadRequest(f"{field}: {text[:100]!r} is not a position (partition-offset "
                             f"pairs joined by '.', e.g. '0-12.1-30')", field=field)
        out[int(p)] = int(o)
    if set(out) != want:
        raise BadRequest(f"{field}: the position names partitions {sorted(out)}, this "
                         f"subscription covers {sorted(want)}", field=field)
    return out
