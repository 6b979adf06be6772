package shop

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

// pageHTML is the shop's single page: open an account with an order, pay it (the Pay
// button can be double-clicked), and see the order status, the balance and the ledger.
//
//go:embed page.html
var pageHTML []byte

// page: GET / -> the HTML page.
func (a *App) page(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "text/html; charset=utf-8", pageHTML)
}
