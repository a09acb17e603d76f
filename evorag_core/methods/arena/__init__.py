"""ARENA: the traceable, citing answer generator (structured prompt, parser, the four rewards, the method)."""
