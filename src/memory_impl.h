/* ---- memory (implementation): under construction ---- */
