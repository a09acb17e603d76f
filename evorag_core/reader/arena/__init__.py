"""ARENA's traceable, citing answer generator: prompt, strict parser and the generator (the ARENA method and its
rewards are in `evorag_core.methods.arena`)."""
