"""The worker's Kafka side: Faust's consumer corrected, offset order, commit repair, membership."""
