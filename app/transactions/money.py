"""Money: an amount in minor units (the contract's `amount_minor`) in its currency's units."""

from __future__ import annotations

from typing import Final

#: ISO 4217 currencies whose minor unit is not a hundredth (every other code has two decimals).
_DECIMALS: Final[dict[str, int]] = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF",
                     "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}


def decimals(currency: str) -> int:
    """Digits after the decimal point of `currency` (ISO 4217; 2 for a code not listed)."""
    return _DECIMALS.get(currency, 2)


def units(amount_minor: float, currency: str) -> float:
    """`amount_minor` in units of `currency` (64172 USD cents -> 641.72)."""
    return amount_minor / 10 ** decimals(currency)
