"""The Faust app: its consumer (kafka), card state (state), loops (engine) and feeds (feeds)."""
