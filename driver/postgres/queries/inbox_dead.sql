-- Parks a claimed row as dead, through the protocol's function.
SELECT {{schema}}.inbox_dead($1, $2);
