"""The parameter budget suite (the "Params" column of the PALs paper)."""
