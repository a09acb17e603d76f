"""DynaKrag's controller fit (no adapter): `config.py` (DynakragRoundConfig and the job's [dynakrag] keys),
`round.py` (explore, fit, install the controller folder)."""
