# cmake -DINPUT=file -DOUTPUT=file.c -DSYMBOL=name -P EmbedBinary.cmake: writes a C file defining
# `const unsigned char name[]` with INPUT's bytes (the reduction kernels' fatbin, which the NCCL
# library hands to cuModuleLoadData), 8-byte aligned as the driver wants it.
file(READ ${INPUT} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUTPUT}
  "/* Generated from ${INPUT} by cmake/EmbedBinary.cmake. */\n"
  "const unsigned char ${SYMBOL}[] __attribute__((aligned(8))) = {${bytes}};\n")
