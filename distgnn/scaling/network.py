"""Latency-bandwidth model of the collectives the trainer uses.

* Alltoallv in which every rank sends S bytes in all, spread over its P - 1 peers:
  ``t = (P - 1) * latency + S / bandwidth`` (pairwise exchange; each rank's link carries S).
* Allreduce of G bytes (ring: reduce-scatter then all-gather):
  ``t = 2 (P - 1) * latency + 2 (P - 1) / P * G / bandwidth``.
Defaults: 100 Gb/s InfiniBand (12.5 GB/s line rate, 1.5 us MPI latency). Fitted values come from
the MPI microbenchmark (:mod:`distgnn.scaling.microbench`), by least squares of time against bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

IB100_BANDWIDTH = 12.5e9   #: bytes/s, 100 Gb/s line rate
IB100_LATENCY = 1.5e-6     #: s


@dataclass
class NetworkModel:
    """Latency (s) and bandwidth (bytes/s) of Alltoallv and of Allreduce."""

    latency: float = IB100_LATENCY
    bandwidth: float = IB100_BANDWIDTH
    allreduce_latency: float = IB100_LATENCY
    allreduce_bandwidth: float = IB100_BANDWIDTH
    source: str = "100 Gb/s InfiniBand defaults"

    def alltoallv(self, parts: int, bytes_per_rank: float) -> float:
        """Seconds for one Alltoallv in which each rank sends ``bytes_per_rank`` in all."""
        if parts <= 1:
            return 0.0
        return (parts - 1) * self.latency + bytes_per_rank / self.bandwidth

    def allreduce(self, parts: int, nbytes: float) -> float:
        """Seconds for one ring Allreduce of ``nbytes``."""
        if parts <= 1:
            return 0.0
        return 2 * (parts - 1) * self.allreduce_latency + 2 * (parts - 1) / parts * nbytes / self.allreduce_bandwidth

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "NetworkModel":
        return cls(**d)


def fit_latency_bandwidth(nbytes: list[float], seconds: list[float],
                          relative: bool = True) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of ``t = latency + bytes / bandwidth``, by least squares
    weighted to relative error (small and large messages count alike), or with ``relative=False``
    to absolute error (the large messages set the bandwidth: over a shaped link, whose token bucket
    lets a burst through at line rate, small messages would set it far too high)."""
    x = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    w = 1.0 / t if relative else np.ones_like(t)
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    (lat, inv_bw), *_ = np.linalg.lstsq(A, t * w, rcond=None)
    lat = max(float(lat), 0.0)
    inv_bw = max(float(inv_bw), 1e-15)
    return lat, 1.0 / inv_bw


def fitted_network(pingpong: dict, alltoall: dict, allreduce: dict, relative: bool = True) -> NetworkModel:
    """A model from microbenchmark results (each: {"bytes": [...], "seconds": [...]}, 2 ranks);
    ``relative``: as :func:`fit_latency_bandwidth` (False for a shaped link).

    Alltoallv at P = 2 is one exchange of S bytes: latency and bandwidth are fitted on it directly
    (ping-pong is reported alongside). Allreduce at P = 2 costs ``2 lat + G / bw``."""
    lat, bw = fit_latency_bandwidth(alltoall["bytes"], alltoall["seconds"], relative)
    ar_lat2, ar_bw = fit_latency_bandwidth(allreduce["bytes"], allreduce["seconds"], relative)
    pp_lat, pp_bw = fit_latency_bandwidth(pingpong["bytes"], pingpong["seconds"], relative)
    return NetworkModel(latency=lat, bandwidth=bw, allreduce_latency=ar_lat2 / 2,
                        allreduce_bandwidth=ar_bw,
                        source=f"measured here (ping-pong: {pp_lat * 1e6:.1f} us, {pp_bw / 1e9:.2f} GB/s)")
