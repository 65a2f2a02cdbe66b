/* ---- safetensors (declarations): under construction ---- */
