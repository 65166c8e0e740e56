"""The Faust app: topics, tables and agents."""
