"""Transaction contract: schema, validation and log files."""
