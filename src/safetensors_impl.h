/* ---- safetensors (implementation): under construction ---- */
