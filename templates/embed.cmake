# Embeds the .s templates into a header so that mlagen does not depend on the source tree.
file(READ ${SRC_DIR}/kernel.s.tmpl KERNEL_TMPL)
file(READ ${SRC_DIR}/arg.tmpl ARG_TMPL)
file(WRITE ${OUT}.tmp "// Generated from templates/: do not edit.\n#pragma once\nnamespace mla::gen::templates {\n")
file(APPEND ${OUT}.tmp "inline constexpr const char* kKernel = R\"TMPL(${KERNEL_TMPL})TMPL\";\n")
file(APPEND ${OUT}.tmp "inline constexpr const char* kArg = R\"TMPL(${ARG_TMPL})TMPL\";\n}\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
