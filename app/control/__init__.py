"""The control topic: model activation, the shadow model, allow/block lists and rules on one
compacted partition, published by `publisher` and folded by `fold` (the worker's one follower
and the action service's readers use the same fold)."""
