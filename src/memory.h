/* ---- memory (declarations): under construction ---- */
