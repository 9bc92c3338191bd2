#include "trace/trace-hw_mem_nuksm.h"
