# cmake -DINPUT=file -DOUTPUT=file.c -DSYMBOL=name [-DTEXT=1] -P EmbedBinary.cmake: writes a C file
# defining `const unsigned char name[]` with INPUT's bytes, 8-byte aligned as the CUDA driver wants
# a fatbin (the reduction kernels' for cuModuleLoadData); TEXT adds a terminating NUL, for source
# text handed to a compiler at run time (hiprtc).
file(READ ${INPUT} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
if(TEXT)
  string(APPEND bytes "0x00,")
endif()
file(WRITE ${OUTPUT}
  "/* Generated from ${INPUT} by cmake/EmbedBinary.cmake. */\n"
  "const unsigned char ${SYMBOL}[] __attribute__((aligned(8))) = {${bytes}};\n")
