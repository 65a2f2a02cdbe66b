/* ---- ops (declarations): under construction ---- */
