"""Where the data that ships inside the ``matrl`` package lives (``matrl/data/``).

Why one module: the defaults (the band-gap weights, the hull), the examples and the tests all
name these files, and they must resolve inside the installed package on any machine, never to a
path outside it. Provenance, licences and checksums: ``data/README.md``.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).with_name("data")

#: Our approximate hull (``python -m matrl.build_reference``), the default ``hull_reference``.
HULL_REFERENCE = DATA_DIR / "chgnet_hull_reference.json"
#: MatGL's multi-fidelity MEGNet band-gap weights (BSD-3), the default ``band_gap_model``.
MEGNET_BANDGAP = DATA_DIR / "megnet-bandgap" / "MEGNet-MP-2019.4.1-BandGap-mfi"
#: 142 + 123 unmodified MP-20 rows (CDVAE CSV format, gzipped; Materials Project data, CC-BY-4.0).
MP20_SUBSET = {split: DATA_DIR / "mp20-subset" / f"{split}.csv.gz" for split in ("test", "val")}
#: Materials Project GGA elemental reference entries (89 elements; CC-BY-4.0), for
#: :func:`matrl.hull.load_mp_elemental_refs`.
MP_ELEMENTAL_REFS = DATA_DIR / "mp-elemental-refs" / "2023-02-07-mp-elemental-reference-entries.json.gz"
