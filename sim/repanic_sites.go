package sim

// Code below is repetitive on purpose; see repanic.

// repanicSites are distinct functions that raise a task's panic again in
// the goroutine that called Run. rapid tells failures apart by the
// traceback of the panic it recovers, and every panic re-raised from one
// place would look like one failure to it: an exhausted draw would pass
// for the assertion it was shrinking. Re-raising from a site chosen by
// where the panic began keeps different failures different.
var repanicSites = [...]func(v any){
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
	func(v any) { panic(v) },
}
