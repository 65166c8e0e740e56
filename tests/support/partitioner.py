"""Where Kafka's Java client puts a keyed record: known values to pin our partitioner to."""

from __future__ import annotations

#: Kafka's own murmur2 known values (clients' `UtilsTest.testMurmur2`: "21" → -973932308,
#: "foobar" → -790332482, ...) taken through the Java client's default partitioner,
#: `toPositive(murmur2(key)) % partitions` (toPositive = `& 0x7fffffff`), worked out by hand:
#: not computed by the code under test.
KAFKA_DEFAULT_PARTITIONS: list[tuple[bytes, int, int]] = [
    (b"21", 8, 4), (b"21", 12, 0), (b"21", 16, 12),
    (b"foobar", 8, 6), (b"foobar", 3, 0), (b"foobar", 16, 14),
    (b"a-little-bit-long-string", 8, 0), (b"a-little-bit-long-string", 12, 8),
    (b"a-little-bit-longer-string", 8, 3), (b"a-little-bit-longer-string", 12, 11),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 8, 5),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 16, 13),
    (b"abc", 8, 3), (b"abc", 3, 0), (b"abc", 16, 11),
]

