/* ---- attn (declarations): under construction ---- */
