"""Card state: the card_state table, its memory and RocksDB stores, and their changelog restore."""
