"""The id alphabet of the contracts (transaction, card, merchant and entity ids, client keys):
one pattern, written once; a leaf module below every package (imports nothing of app)."""

from __future__ import annotations

import re
from typing import Final

#: The characters of an id (the `-` last: literal in Python, RE2 and JSON Schema patterns alike).
ID_CHARS: Final = "A-Za-z0-9_.:-"
#: An id: 1..64 of ID_CHARS (unanchored, to match with `fullmatch` or to build other patterns).
ID_PATTERN: Final = f"[{ID_CHARS}]{{1,64}}"
#: ID_PATTERN compiled (use `fullmatch`).
ID_RE: Final = re.compile(ID_PATTERN)
#: ID_PATTERN anchored, for JSON Schema (OpenAPI) and Arrow's regex kernels.
ID_ANCHORED: Final = f"^{ID_PATTERN}$"
#: What a bad id is told, after its field's name.
ID_RULE: Final = f"1..64 characters of [{ID_CHARS}]"
