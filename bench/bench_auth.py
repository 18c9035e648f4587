"""Lookups/s with client authentication on vs off, same run.

Two identical 2-node clusters on one broker and one changelog (100k accounts by
default): one with authentication on (an HS256 JWT checked on every lookup, its
verification cached; the token also travels with each forwarded lookup and the owner
checks it again), one with ``--no-auth``. Hops carry the cluster credential in both.
wrk sends the same key lookups (half local, half forwarded) to the first node of each
in back-to-back pairs of alternating order; the median of the per-pair ratios is
checked against the target: on/off >= 0.9x (issue 17). Needs wrk.

    python bench/bench_auth.py [--keys 100000] [--pairs 8] [--seconds 2]
"""

from __future__ import annotations

import statistics
import uuid

from bench_log_level import arguments, paired

from streamiq.auth import mint

TARGET = 0.9


def main() -> None:
    a = arguments(__doc__)
    secret, cluster = uuid.uuid4().hex, uuid.uuid4().hex
    token = {"authorization": f"Bearer {mint(secret, subject='bench')}"}
    ratios, got = paired(
        a, {"on": ["--auth", "--jwt-secret", secret, "--cluster-secret", cluster],
            "off": ["--no-auth", "--cluster-secret", cluster]},
        {"on": token, "off": None})
    med = statistics.median(ratios)
    print(f"lookups/s (local + forwarded, c={a.conns}): authentication on {got['on']:.0f}, "
          f"off {got['off']:.0f}; median of {a.pairs} paired ratios {med:.2f}x "
          f"(target >= {TARGET}x: {'met' if med >= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
