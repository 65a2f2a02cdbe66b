/* ---- ops (implementation): under construction ---- */
