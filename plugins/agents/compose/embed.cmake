# cmake -DIN=engine_template.c -DOUT=engine_template.inc -P embed.cmake:
# the skeleton's bytes as a C array, so the composer carries the very text
# the build compiled (no file to find at run time, no escaping to get wrong).
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE ${OUT}.tmp "/* generated from ${IN} by embed.cmake: do not edit */\nstatic const char k_engine_template[] = {\n${bytes}0x00};\n")
file(RENAME ${OUT}.tmp ${OUT})
