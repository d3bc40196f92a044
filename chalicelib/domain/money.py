"""Currencies: ISO 4217 codes and their minor units (the default `decimal_places`)."""
from __future__ import annotations

# Active ISO 4217 codes (list one, 2024), plus the precious-metal and testing codes excluded.
ISO_4217 = frozenset("""
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN
BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP
GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF
KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR
MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK
SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI
UYU UYW UZS VED VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG ZWL
""".split())
MINOR_UNITS_EXCEPTIONS = {
    **dict.fromkeys("BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
}
DEFAULT_CURRENCY = "USD"
MAX_DECIMAL_PLACES = 6
# Amounts must fit a signed 64-bit integer, the matching engine's column type. Their sums need
# not: in Python they are ints, a frame sums them with `matching.frames.amount_sum` (in 128 bits,
# which hold 2**64 amounts at the bound), and numpy searches over sums switch to Python ints when
# the amounts come near the bound (`matching.subset`, `investigations.engine`): never the 64
# bits that wrap. Filters and inputs take amounts up to MAX_AMOUNT, no other bound.
MAX_AMOUNT = 2**63 - 1


def minor_units(currency: str) -> int:
    return MINOR_UNITS_EXCEPTIONS.get(currency, 2)


def decimal_string(minor: int, decimal_places: int) -> str:
    """Minor units as the decimal they stand for, exactly: 12345 at 2 places is "123.45", -5 is
    "-0.05", 7 at 0 places is "7". Integers only: never through a float."""
    if decimal_places <= 0:
        return str(minor)
    sign = "-" if minor < 0 else ""
    digits = str(abs(minor)).rjust(decimal_places + 1, "0")
    return f"{sign}{digits[:-decimal_places]}.{digits[-decimal_places:]}"
