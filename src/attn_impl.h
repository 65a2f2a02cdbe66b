/* ---- attn (implementation): under construction ---- */
