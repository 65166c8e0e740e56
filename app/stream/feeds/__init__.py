"""What every worker follows beside its input: the control topic (lists, rules, models), labels."""
